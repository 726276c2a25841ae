"""Views of a database for people: `inspect` (`inspect.py`, read through storage's queries), the
live terminal tree (`watch`) and the HTML timeline; `terminal.py` escapes model-written text for
any command that prints it."""
