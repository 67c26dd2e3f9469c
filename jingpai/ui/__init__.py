"""The demo page served by the gateway."""
