"""Helpers the tests import: the suite's services and flow runs, proxies that inject faults
in front of the real servers, stand-ins for unit tests, and test data."""
