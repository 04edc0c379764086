"""Reporting: number formatting, JUnit properties, the terminal summary."""
