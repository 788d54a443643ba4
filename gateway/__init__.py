"""The HTTP gateway: validate, render, tokenize, route to a worker, assemble the answer."""
