"""The whole topology on one machine, for real and without an AWS account (``voicewire up``):
an API Gateway WebSocket emulator, the Lambda functions in-process, DynamoDB (moto's server),
the speech server with the CPU engine, and the replay LLM (or real Bedrock)."""
