"""The numbered SQL migrations, a package so any install (a wheel, pipx, an image) carries them as its data."""
