"""Object store access and the immutable file formats (SST, journal file) with their clerks."""
