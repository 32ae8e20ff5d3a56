"""Work-order approvals (four eyes): ``rebound approvals list|show|approve|reject`` and
``/approvals``; the gate the held actions pass (``rebound.domain.approvals``).

- ``Approvals.gate`` is asked by a held action before it changes anything: where the
  environment's rules hold it and the caller carries no approval, it stores a pending request
  (audited on ``approval#<id>``) and raises ``ApprovalRequired``. The same request asked again
  while it is open (a retried call) is the same request: its id follows from what it asks.
- ``approve`` by another operator with rights on the request's tenant: the request becomes
  ``approved`` by a conditional write (two approvers at once: one wins, the other is told), then
  the action is carried out as the approver, once: under a claim (``approval-carry#<id>``, a lease),
  and only if the subject's audit chain does not already name the request (a crash after the
  action and before ``done`` is finished by asking again). Then ``done``, with the outcome.
- ``reject`` closes it; a request past its ``expires_at`` closes as ``expired`` when next touched
  (and is refused).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from rebound.domain.approvals import (
    OPEN,
    ApprovalRequest,
    ApprovalRequired,
    ApprovalState,
    approval_subject,
)
from rebound.domain.errors import Conflict, Forbidden, NotFound, ReboundError
from rebound.engine.deps import Deps
from rebound.engine.workstreams import versioned_body as _body

INDEX_KEY = "approvals#index"
"""The open requests' ids and tenants, and the latest closed ones (a versioned control record)."""
RECENT = 200
CARRY_LEASE = timedelta(minutes=5)
WRITE_TRIES = 5


class ApprovalNotFound(NotFound):
    code = "APPROVAL_NOT_FOUND"


class OwnApproval(Forbidden):
    code = "OWN_APPROVAL"


def _key(request_id: str) -> str:
    return f"approval#{request_id}"


Carrier = Callable[[Deps, str, ApprovalRequest], dict[str, Any]]
"""Carries out a request's action as the approver (``actor``); returns its outcome."""


class Approvals:
    def __init__(self, deps: Deps, actor: str, carriers: dict[str, Carrier] | None = None) -> None:
        self.deps = deps
        self.store = deps.store
        self.actor = actor
        self.carriers = carriers if carriers is not None else default_carriers()

    # ---------------------------------------------------------------------------- the gate
    def gate(self, action: str, tenant: str, subject: str, args: dict[str, Any], reason: str) -> None:
        """Store (or find) the pending request for this action and raise ``ApprovalRequired``."""
        now = self.deps.clock.now()
        canonical = json.dumps([action, subject, args, self.actor], sort_keys=True, default=str)
        base = "apr-" + hashlib.sha256(canonical.encode()).hexdigest()[:12]
        found, _ = _body(self.store.get_key(_key(base)))
        if found is not None:
            existing = ApprovalRequest.model_validate(found)
            if existing.state is ApprovalState.PENDING and not existing.expired(now):
                raise ApprovalRequired(existing)
        request_id = base if found is None else f"{base}-{int(now.timestamp())}"
        request = ApprovalRequest(
            request_id=request_id,
            action=action,
            tenant=tenant,
            subject=subject,
            args=args,
            reason=reason,
            requested_by=self.actor,
            requested_at=now,
            expires_at=now + self.deps.settings.approval_rules().expires_after,
        )
        uow = self.store.unit_of_work(self.actor, now)
        uow.stage_versioned(_key(request_id), request.view(), None, f"approval {request_id}")
        uow.append_audit(
            approval_subject(request_id),
            action="approval-requested",
            to_state=ApprovalState.PENDING.value,
            evidence={"action": action, "subject": subject, "args": args, "reason": reason, "tenant": tenant},
        )
        with contextlib.suppress(Conflict):  # the same request, stored by a copy of this call before
            uow.commit()
        self._index(lambda index: _indexed(index, request))
        raise ApprovalRequired(request)

    # ---------------------------------------------------------------------------- reading
    def get(self, request_id: str) -> ApprovalRequest:
        found, _ = _body(self.store.get_key(_key(request_id)))
        if found is None:
            raise ApprovalNotFound(f"no approval request {request_id!r}", request_id=request_id)
        return ApprovalRequest.model_validate(found)

    def tenant_of(self, request_id: str) -> str:
        return self.get(request_id).tenant

    def list(
        self, *, sees: Callable[[str], bool] | None = None, closed: bool = False
    ) -> list[ApprovalRequest]:
        """The open requests (``closed``: the latest closed ones too), newest first, of the
        tenants ``sees`` allows."""
        index, _ = _body(self.store.get_key(INDEX_KEY))
        entries = [*(index or {}).get("open", []), *((index or {}).get("recent", []) if closed else [])]
        ids = [e["id"] for e in entries if sees is None or sees(e["tenant"])]
        found = self.store.get_keys([_key(i) for i in ids])
        now = self.deps.clock.now()
        out = []
        for request_id in ids:
            body, _ = _body(found.get(_key(request_id)))
            if body is None:
                continue
            request = ApprovalRequest.model_validate(body)
            if request.expired(now):
                request = request.model_copy(update={"state": ApprovalState.EXPIRED})
            if closed or request.state in OPEN:
                out.append(request)
        return sorted(out, key=lambda r: r.requested_at, reverse=True)

    # ---------------------------------------------------------------------------- deciding
    def reject(self, request_id: str, note: str = "") -> ApprovalRequest:
        request, version = self._open(request_id)
        if request.state is not ApprovalState.PENDING:
            raise Conflict(
                f"request {request_id} was approved by {request.decided_by}; it cannot be rejected now",
                request_id=request_id,
                state=request.state.value,
            )
        return self._decide(request, version, ApprovalState.REJECTED, note)

    def approve(self, request_id: str, note: str = "") -> ApprovalRequest:
        for _ in range(WRITE_TRIES):
            request, version = self._open(request_id, done_ok=True)
            if request.state is ApprovalState.DONE:
                if request.decided_by != self.actor:
                    raise Conflict(
                        f"request {request_id} was approved and carried out by {request.decided_by}",
                        request_id=request_id,
                        state=request.state.value,
                    )
                return request  # a repeat of the approver's own call
            if request.requested_by == self.actor:
                raise OwnApproval(
                    f"you asked for request {request_id}: another operator must approve it",
                    request_id=request_id,
                )
            if request.state is ApprovalState.APPROVED and request.decided_by != self.actor:
                raise Conflict(
                    f"request {request_id} was approved by {request.decided_by}, who carries it out",
                    request_id=request_id,
                    state=request.state.value,
                )
            if request.state is ApprovalState.PENDING:
                try:
                    request = self._decide(request, version, ApprovalState.APPROVED, note)
                except Conflict:
                    continue  # someone decided at the same moment: look again
            return self._carry_out(request)
        raise Conflict(f"request {request_id} kept changing; look again", request_id=request_id)

    def _open(self, request_id: str, *, done_ok: bool = False) -> tuple[ApprovalRequest, int]:
        found, version = _body(self.store.get_key(_key(request_id)))
        if found is None or version is None:
            raise ApprovalNotFound(f"no approval request {request_id!r}", request_id=request_id)
        request = ApprovalRequest.model_validate(found)
        if request.expired(self.deps.clock.now()):
            with contextlib.suppress(Conflict):  # someone closed it a moment before
                self._decide(request, version, ApprovalState.EXPIRED, "expired")
            raise Conflict(
                f"request {request_id} expired at {request.expires_at.isoformat()}: nothing was done; "
                "ask again if it is still needed",
                request_id=request_id,
                state=ApprovalState.EXPIRED.value,
            )
        if request.state in OPEN or (done_ok and request.state is ApprovalState.DONE):
            return request, version
        raise Conflict(
            f"request {request_id} is {request.state.value}"
            + (f" (by {request.decided_by})" if request.decided_by else ""),
            request_id=request_id,
            state=request.state.value,
        )

    def _decide(
        self,
        request: ApprovalRequest,
        version: int,
        state: ApprovalState,
        note: str,
        outcome: dict[str, Any] | None = None,
    ) -> ApprovalRequest:
        now = self.deps.clock.now()
        decided = state is not ApprovalState.DONE
        after = request.model_copy(
            update={
                "state": state,
                "decided_by": self.actor
                if decided and state is not ApprovalState.EXPIRED
                else request.decided_by,
                "decided_at": now if decided else request.decided_at,
                "note": note or request.note,
                "outcome": outcome if outcome is not None else request.outcome,
            }
        )
        uow = self.store.unit_of_work(self.actor, now)
        uow.stage_versioned(_key(request.request_id), after.view(), version, f"approval {request.request_id}")
        evidence: dict[str, Any] = {"requested_by": request.requested_by, "action": request.action}
        if note:
            evidence["note"] = note
        if outcome is not None:
            evidence["outcome"] = outcome
        uow.append_audit(
            approval_subject(request.request_id),
            action=f"approval-{state.value}",
            from_state=request.state.value,
            to_state=state.value,
            evidence=evidence,
        )
        uow.commit()
        if state not in OPEN:
            self._index(lambda index: _indexed(index, after))
        return after

    def _carry_out(self, request: ApprovalRequest) -> ApprovalRequest:
        """The approved action, once (see the module's docstring), then ``done``."""
        now = self.deps.clock.now()
        claim = f"approval-carry#{request.request_id}"
        if not self.store.claim_key(claim, now, CARRY_LEASE, {"by": self.actor}):
            raise Conflict(
                f"request {request.request_id} is being carried out now; look again in a moment",
                request_id=request.request_id,
            )
        if _carried(self.deps, request):
            outcome: dict[str, Any] = {"ok": True, "carried_out": "before"}
        else:
            try:
                outcome = {"ok": True, **self.carriers[request.action](self.deps, self.actor, request)}
            except ReboundError as exc:
                if exc.http_status in (429, 503) or exc.http_status >= 500:
                    self.store.release_key(claim)
                    raise  # throttled or unavailable: approve again to finish
                outcome = {"ok": False, "code": exc.code, "message": exc.message}
        _, version = _body(self.store.get_key(_key(request.request_id)))
        done = self._decide(request, int(version or 0), ApprovalState.DONE, "", outcome)
        self.store.release_key(claim)
        return done

    def _index(self, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        for _ in range(WRITE_TRIES):
            body, version = _body(self.store.get_key(INDEX_KEY))
            new = change(body or {})
            if new == body:
                return
            uow = self.store.unit_of_work(self.actor, self.deps.clock.now())
            uow.stage_versioned(INDEX_KEY, new, version, "approvals index")
            try:
                uow.commit()
            except Conflict:
                continue
            return
        raise Conflict("the approvals index kept changing; look again")


def _indexed(index: dict[str, Any], request: ApprovalRequest) -> dict[str, Any]:
    entry = {"id": request.request_id, "tenant": request.tenant}
    open_ = [e for e in index.get("open", []) if e["id"] != request.request_id]
    recent = [e for e in index.get("recent", []) if e["id"] != request.request_id]
    if request.state in OPEN:
        open_.append(entry)
    else:
        recent = [entry, *recent][:RECENT]
    return {"open": open_, "recent": recent}


def _carried(deps: Deps, request: ApprovalRequest) -> bool:
    """Whether the subject's audit chain already names this request (carried out before a crash)."""
    return any(
        r.evidence.get("approval") == request.request_id for r in deps.store.audit_trail(request.subject)
    )


def default_carriers() -> dict[str, Carrier]:
    from rebound.ops.approval_carriers import CARRIERS

    return CARRIERS
