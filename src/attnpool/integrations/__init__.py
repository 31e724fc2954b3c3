"""Bridges to other libraries; each is imported only when used (its dependency is an optional extra)."""
