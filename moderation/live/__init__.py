"""The websockets: the consumer (translation only), the rules for who may hold a socket
and what it is sent (``sockets``), presence, and rights changes pushed to open sockets.
Above the guard's records (it relays their events); below the pages, which show its state."""
