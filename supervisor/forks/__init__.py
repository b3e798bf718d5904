"""The supervisor's side of its fork servers and of the children they fork."""
