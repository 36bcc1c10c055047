"""The fallback search (precision.fallback=auto): the fewest nodes kept out of the low type
for the gate to hold (search), by layer and group (groups), behind the calibration cache
(cache), with the written graph's last word (written). Enter by search."""
