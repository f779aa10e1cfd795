# Its tests import the package from this folder (pytest puts a rootless conftest's folder on
# sys.path), so they test the source as it is here, installed or not.
