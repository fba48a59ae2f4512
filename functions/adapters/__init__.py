"""Adapters: the outside world (Bedrock, the speech session, connections, DynamoDB) behind small
interfaces, so the same turn logic runs in Lambda, in the local stack and in tests."""
