"""One module per CLI command; registered in droidheap/cli.py."""
