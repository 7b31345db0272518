"""Software stacks: the compatibility matrix and the pinned engine sets that install.sh installs."""
