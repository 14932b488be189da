"""The hardware-in-the-loop side: servo driver, recorder, validation, the demo supervisor and the `mms` command."""
