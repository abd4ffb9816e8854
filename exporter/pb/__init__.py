"""Generated PodResources v1 stubs (see generate.py); do not edit by hand."""
