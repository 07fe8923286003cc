"""The numbered SQL migrations, shipped inside the package so any install (a wheel, pipx, an image) has them."""
