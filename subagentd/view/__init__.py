"""Views of a database for people: the live terminal tree (`watch`) and the HTML timeline."""
