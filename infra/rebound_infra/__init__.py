"""The CDK app: stacks, constructs, and the resource definitions the local cloud shares."""
