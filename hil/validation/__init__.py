"""Validation (`mms validate`): a recording's health, measured against simulated signals, and the report."""
