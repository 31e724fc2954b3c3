"""The PPPM recipe as a library: k-fold training on transformers' Trainer (:func:`attnpool.training.recipe.train`)."""
