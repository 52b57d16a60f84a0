"""Expression engine: ICT morphable model on the 468-landmark topology."""
