"""Rehearse a deploy: the synthesized template on the local cloud, each function from its built
bundle in its own interpreter, every AWS call checked against the function's role (``run``)."""
