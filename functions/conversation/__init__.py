"""The conversation's rules, in one place for both front doors (the WebSocket API's Lambda
functions and the AgentCore Runtime app):

    rules         starting a turn (rate limit, barge-in), cancelling one, keeping an exchange,
                  cutting it to what was heard
    state         the state those rules read and write: ``ConversationState``, kept in DynamoDB
                  (``functions.adapters.conversation_table.TableConversation``) or in memory
                  (``MemoryConversation``)
    history       what the history keeps and how an exchange enters it (bounded, closed)
    heard         what the listener heard of a cut answer, and the history that keeps only that
    rate_window   at most so many turns per clock minute
    turn_frames   the frames that begin and end a turn for the client
"""
