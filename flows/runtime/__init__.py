"""The process around the flow: what bytewax.run was asked, signals and the graceful stop,
pause, the recovery store, the collector, the last lines and the exits."""
