"""Reading a point in time from the object store: views, scans, folds, index queries and
their result batches. No Ray."""
