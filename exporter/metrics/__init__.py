"""The metric catalogue, its text-exposition renderer and the content coding of served bodies."""
