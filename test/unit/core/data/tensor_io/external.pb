Bextj
locationweights.binp