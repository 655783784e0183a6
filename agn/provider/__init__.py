"""A fake inference provider: real HTTP endpoints for the operator to probe and gateways to route to."""
