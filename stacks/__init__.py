"""The CDK stacks and what they package (the Lambda bundle). Tools: they assemble the tiers."""
