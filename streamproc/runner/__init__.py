"""The runner: takes segments from the work queue, asks the scanner for verdicts, records
them as events and tells Notify what got worse (see docs/notify.md)."""
