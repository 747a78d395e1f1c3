"""Rules, one small module each, named after what they find. Importing this package registers them."""
