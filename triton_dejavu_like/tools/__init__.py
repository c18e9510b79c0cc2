"""Tools around the store: the command line and the triton-dejavu importer."""
