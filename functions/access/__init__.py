"""Who may open a connection: connect tickets (``tickets``) and browser origins (``origins``).
The authorizer and the connect route (``functions.handlers``) apply them."""
