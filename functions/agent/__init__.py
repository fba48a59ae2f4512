"""The agent that answers an ask: the events a turn speaks from (``events``), voicewire's own
loop over Bedrock's ConverseStream (``loop``) and a Strands agent (``strands_agent``). The
tools they call are ``functions.tools``."""
