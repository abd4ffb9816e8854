"""The metric catalogue and its text-exposition renderer."""
