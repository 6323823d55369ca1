"""The ``pynvml`` of the node's monitors the unit tests start: NVML answers as on a machine without a driver.

First on such a monitor's path (:func:`tests.unit.monitors.monitor_env`), it stands in for nvidia-ml-py, so
that no NVML event of the machine the tests run on (a GPU runner's Xid, a GPU lost) reaches a unit test: the
monitor's GPU listener is off, and says why with this module's words.
"""

#: NVML's return code for a driver that is not loaded (nvml.h's ``NVML_ERROR_DRIVER_NOT_LOADED``).
NVML_ERROR_DRIVER_NOT_LOADED = 9
#: What the monitor says of NVML, through the listener's "GPU events off" line.
SAID = "Driver Not Loaded (the unit tests' pynvml: no NVML here)"


class NVMLError(Exception):
    """What pynvml raises: ``value`` is NVML's return code."""

    def __init__(self, value: int) -> None:
        super().__init__(SAID)
        self.value = value


class NVMLError_DriverNotLoaded(NVMLError):
    """pynvml's error for a driver that is not loaded."""

    def __init__(self) -> None:
        super().__init__(NVML_ERROR_DRIVER_NOT_LOADED)


def nvmlInit() -> None:
    """NVML's start: fails, as without a driver."""
    raise NVMLError_DriverNotLoaded()
