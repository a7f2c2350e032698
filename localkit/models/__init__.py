"""scikit-learn estimators built on the engine, grouped by task."""
