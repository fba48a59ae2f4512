"""The voice pipeline's Lambda functions: thin handlers over turn logic over adapters."""
