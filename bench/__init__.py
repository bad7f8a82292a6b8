"""Benchmarks: they print figures; they are not tests."""
