"""Compiled sandbox contract artifacts (package data)."""
