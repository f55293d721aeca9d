"""Experiment runners: small, seeded studies that train several variants and write a report."""
