from speech_server.server import main

main()
