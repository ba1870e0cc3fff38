"""droidheap: a native heap profiler for Android, with a Linux emulator device."""

__version__ = "0.1.0"
