"""The autodiff-free oracle of a float64 loss: entry by entry (``entries``), along random directions
(``directions``), and what it differences (``function``)."""
