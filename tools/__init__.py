"""Tools that run from a checkout and are never installed: the bench, the chaos and soak
harnesses, the developer kit and the demo."""
