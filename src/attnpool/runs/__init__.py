"""The run directory: its layout (:class:`Run`), atomic writes, and the lock that keeps one writer at a time."""
