"""Test and bench infrastructure: emulators, stand-in trainers and servers that tests/ and bench/ drive
(README.md here says what each module is). Never shipped: no image copies it and the wheel leaves it out."""
