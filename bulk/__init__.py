"""Bulk writes and parallel checkpoint reads, used by Spark and ``export``."""
