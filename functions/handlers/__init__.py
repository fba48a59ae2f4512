"""Lambda entry points, one module per function: parse the event, call logic, shape the reply."""
