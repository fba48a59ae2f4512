"""The ``voicewire`` subcommands, one module each."""
