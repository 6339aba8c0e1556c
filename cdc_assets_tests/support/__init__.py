"""Test support: an independent Debezium record decoder (the oracle) and a corpus of bad records."""
