"""Reading synthesized templates: IAM statements per role, and references between resources."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENVIRONMENTS = ("dev", "staging", "prod")


@dataclass
class Synth:
    app: Any
    stacks: dict[str, Any]
    outdir: Path
    templates: dict[str, dict[str, Any]]

    def template(self, env: str) -> dict[str, Any]:
        return self.templates[env]

    def resources(self, env: str, type_: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.templates[env]["Resources"].items() if v["Type"] == type_}

    def logical_id(self, env: str, construct: Any) -> str:
        stack = self.stacks[env]
        return str(stack.get_logical_id(construct.node.default_child))


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def ref_target(value: Any) -> str | None:
    """The logical id a ``Ref`` or ``Fn::GetAtt`` points at (``None`` for anything else)."""
    if isinstance(value, dict):
        if "Ref" in value:
            return str(value["Ref"])
        if "Fn::GetAtt" in value:
            return str(value["Fn::GetAtt"][0])
    return None


def mentions(value: Any, logical_id: str) -> bool:
    """Whether ``value`` (an ARN expression, however built) refers to ``logical_id``."""
    if isinstance(value, dict):
        if ref_target(value) == logical_id:
            return True
        return any(mentions(v, logical_id) for v in value.values())
    if isinstance(value, list):
        return any(mentions(v, logical_id) for v in value)
    return False


def role_statements(template: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    """Every Allow/Deny statement that applies to the role: inline and attached AWS::IAM::Policy."""
    resources = template["Resources"]
    out: list[dict[str, Any]] = []
    for policy in resources[role_id]["Properties"].get("Policies", []):
        out.extend(policy["PolicyDocument"]["Statement"])
    for res in resources.values():
        if res["Type"] != "AWS::IAM::Policy":
            continue
        if any(ref_target(r) == role_id for r in res["Properties"].get("Roles", [])):
            out.extend(res["Properties"]["PolicyDocument"]["Statement"])
    return out


def actions_on(statements: list[dict[str, Any]], logical_id: str) -> set[str]:
    """The actions the statements allow on a resource (its ARN, or ARNs built from it)."""
    found: set[str] = set()
    for st in statements:
        if st.get("Effect") != "Allow":
            continue
        if any(mentions(r, logical_id) for r in as_list(st.get("Resource", []))):
            found.update(as_list(st["Action"]))
    return found


def all_actions(statements: list[dict[str, Any]]) -> set[str]:
    return {a for st in statements if st.get("Effect") == "Allow" for a in as_list(st["Action"])}


def flatten(value: Any) -> str:
    """A CloudFormation string expression (``Fn::Join`` of ``Ref``/``Fn::GetAtt``) as one string,
    each token a recognizable placeholder: ``<Ref:X>``, ``<GetAtt:X.Attr>``."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(flatten(p) for p in parts)
    if "Ref" in value:
        return f"<Ref:{value['Ref']}>"
    if "Fn::GetAtt" in value:
        logical, attribute = value["Fn::GetAtt"]
        return f"<GetAtt:{logical}.{attribute}>"
    raise AssertionError(f"unexpected intrinsic: {value}")
