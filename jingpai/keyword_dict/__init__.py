"""Domain keyword dictionaries: new-word discovery (PMI + entropy), diff-idf scoring, segmentation."""
