"""The kubernetes runner kind's parts: where a runner's pods go (models), the pod they get (pods), the
cluster connection (resources) and the Pipes client that runs them (pipes). The backend that uses
them is nightly_assets/runners/kubernetes.py."""
