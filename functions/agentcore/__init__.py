"""The voice agent on Bedrock AgentCore Runtime: the same turns as the Lambda worker, behind the
SDK's ``BedrockAgentCoreApp`` (``app``), with the conversation of each runtime session kept in
memory (``conversation``) and its frames carried over ``/ws`` or as the seed's server-sent
events (``transports``). ``python -m functions.agentcore`` serves it on port 8080."""
