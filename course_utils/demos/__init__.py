"""One module per notebook: the panels (controls -> handler -> figures) that notebook displays."""
