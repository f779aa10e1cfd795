"""The item and its asks (``models``): the rows the packages above are about. No logic of its own."""
